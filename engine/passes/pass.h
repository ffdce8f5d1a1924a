#pragma once
// The compiler pass contract.
