#pragma once
// Tokenizers.
