#include "moe/store/store_layout.h"
