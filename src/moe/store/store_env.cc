#include "moe/store/store_env.h"
