#include "engine/passes/pass.h"
