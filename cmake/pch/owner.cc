// The one file of the targets that compile a shared precompiled header (cmake/Pch.cmake).
int main() { return 0; }
