// The source of xrtio_test_pch, the target whose precompiled header (the
// suites' common includes: doctest, Asio, xrtio) every suite reuses; see
// tests/CMakeLists.txt. Nothing is compiled from this file itself.
