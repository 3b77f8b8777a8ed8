//go:build !linux

package wake

func newWatcher(dir string) watcher { return &statWatch{dir: dir} }
