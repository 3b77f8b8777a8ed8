package frame

// headerArray is the first byte of a frame header: the msgpack array of
// three, [descriptors, tree, nonce] (SPEC §4).
const headerArray = 0x93

// Begins reports whether b begins as a tensor frame does: a u32 header
// length, then the header's msgpack array of three, whether or not the
// rest is whole (Detect checks it all). A tool reading bytes of unknown
// kind uses it to report a frame that is cut short as a frame rather than
// as corrupt msgpack. It reads only b[4].
func Begins(b []byte) bool { return len(b) > 4 && b[4] == headerArray }
