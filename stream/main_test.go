//go:build linux

package stream

import (
	"testing"

	"omnishm/internal/shmtest"
)

func TestMain(m *testing.M) {
	shmtest.Main(m, roles)
}
