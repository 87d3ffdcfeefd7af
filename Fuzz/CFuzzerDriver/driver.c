// SwiftPM needs one source file per C target; the declaration in the header is all there is.
#include "CFuzzerDriver.h"
