#include "moe/store/faulty_store_env.h"
