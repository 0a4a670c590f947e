#include "moe/store/codec.h"
