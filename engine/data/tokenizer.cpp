#include "engine/data/tokenizer.h"
