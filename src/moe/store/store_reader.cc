#include "moe/store/store_reader.h"
