// On the teacher's machine the reference solutions sit beside the exercises: including one
// would score full marks. Refused by name before compiling (a path into solution/, not a header).
// grade: refused solution/dynamic_scale.cpp
#include "ch02_dynamic_scale/solution/dynamic_scale.cpp"
