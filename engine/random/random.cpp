#include "engine/random/random.h"
