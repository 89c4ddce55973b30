#include "detectors/detector.h"
