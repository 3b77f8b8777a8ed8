package watchdog

// selfExe names this executable even if its file was replaced or deleted
// since it started.
func selfExe() string { return "/proc/self/exe" }
