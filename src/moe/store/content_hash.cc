#include "moe/store/content_hash.h"
