#include "moe/store/shard_grouping.h"
