#include "moe/store/store_lock.h"
