#include <torch/types.h>
