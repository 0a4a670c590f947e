#include "moe/store/shard_file.h"
