#include "moe/store/store_model.h"
