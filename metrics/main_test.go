//go:build linux

package metrics_test

import (
	"testing"

	"omnishm/internal/shmtest"
)

func TestMain(m *testing.M) { shmtest.Main(m, nil) }
