package shmstate

import (
	"errors"
	"strconv"
	"strings"
)

// parseStartTime reads field 22 of a /proc/{pid}/stat line; the command
// name (field 2) may hold spaces and parentheses, so split after the last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("shmstate: malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("shmstate: short /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
