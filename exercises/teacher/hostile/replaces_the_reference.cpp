// The tests compare the student's function with the project's own loss scaler: defining that
// code here (in its namespace) would make both sides the student's. Refused by name before
// compiling (a namespace other than mixpar::exercises); its symbols would be refused by the
// object check too.
// grade: refused 'mixpar::ch02'
#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::ch02 {
int replaced_reference() { return 0; }
}  // namespace mixpar::ch02

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
