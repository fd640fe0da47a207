// The target that owns the precompiled GoogleTest header every test binary
// reuses (tests/CMakeLists.txt, UROCE_TEST_PCH).  Nothing to run.
int main() { return 0; }
