#include "moe/store/store_writer.h"
