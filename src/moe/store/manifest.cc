#include "moe/store/manifest.h"
