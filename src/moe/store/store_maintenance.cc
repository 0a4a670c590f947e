#include "moe/store/store_maintenance.h"
