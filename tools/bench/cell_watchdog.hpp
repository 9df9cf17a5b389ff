// A hang in one cell names itself: a cell that runs past its limit prints
// the cell, every thread's stack (gdb) and exits with status 124, as the
// test runner's watchdog does (tests/main.cpp). CI's bench stage under
// TSan once ran into its 90 minute limit with nothing printed.
#pragma once

#include <string>

namespace bench {

// Starts the watchdog thread once; limit_s <= 0 leaves it off.
void cell_watchdog_start(double limit_s);
// The cell now running (its name for the report) and when it began.
void cell_watchdog_enter(const std::string& what);
void cell_watchdog_leave();

}  // namespace bench
