package stream

// roles are the child processes of the cross-process tests.
var roles = map[string]func(args []string) int{}
