package resp

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Redis's replies for bad expiry arguments, word for word: clients match
// on them.
var (
	errNotInteger = errors.New("ERR value is not an integer or out of range")
	errSyntax     = errors.New("ERR syntax error")
)

func errInvalidExpire(cmd string) error {
	return errors.New("ERR invalid expire time in '" + cmd + "' command")
}

// setExpiry parses SET's options (what follows the key and the value) into
// the object's expiry in Unix nanoseconds, 0 when none is given. It
// accepts one of EX seconds, PX milliseconds, EXAT unix-seconds, PXAT
// unix-milliseconds, as Redis does; NX, XX, GET and KEEPTTL are refused
// (LMCache's connector and go-redis's Set never send them). now is Unix
// nanoseconds. Errors are RESP error strings.
func setExpiry(opts [][]byte, now int64) (int64, error) {
	var at int64
	for i := 0; i < len(opts); i++ {
		var unit time.Duration
		abs := false
		switch opt := strings.ToUpper(string(opts[i])); opt {
		case "EX":
			unit = time.Second
		case "PX":
			unit = time.Millisecond
		case "EXAT":
			unit, abs = time.Second, true
		case "PXAT":
			unit, abs = time.Millisecond, true
		case "NX", "XX", "GET", "KEEPTTL":
			return 0, errors.New("ERR SET option '" + opt + "' is not supported")
		default:
			return 0, errSyntax
		}
		if at != 0 || i+1 >= len(opts) {
			return 0, errSyntax // two expiries, or one without its number
		}
		i++
		n, err := strconv.ParseInt(string(opts[i]), 10, 64)
		if err != nil {
			return 0, errNotInteger
		}
		if n <= 0 {
			return 0, errInvalidExpire("set")
		}
		var ok bool
		if at, ok = expiresAt(n, unit, abs, now); !ok {
			return 0, errInvalidExpire("set")
		}
	}
	return at, nil
}

// expiresAt turns n units (relative to now, or since the Unix epoch when
// abs) into Unix nanoseconds, reporting false on overflow. A result at or
// before now is clamped to now, which is never 0 ("no expiry"), so a past
// time still means "expired".
func expiresAt(n int64, unit time.Duration, abs bool, now int64) (int64, bool) {
	if n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit) {
		return 0, false
	}
	d := n * int64(unit)
	at := d
	if !abs {
		if (d > 0 && now > math.MaxInt64-d) || (d < 0 && now < math.MinInt64-d) {
			return 0, false
		}
		at = now + d
	}
	return max(at, now), true
}

// expireCommand runs EXPIRE, PEXPIRE, TTL, PTTL or PERSIST, arity already
// checked, and returns the request's result label. Replies follow Redis: TTL is -2 for a missing
// key, -1 for one that never expires; EXPIRE with a time not in the future
// deletes the key.
func (ss *session) expireCommand(name string, args [][]byte) string {
	s := ss.s
	key := string(args[1])
	now := s.node.Now().UnixNano()
	switch name {
	case "EXPIRE", "PEXPIRE":
		n, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			ss.err(errNotInteger.Error())
			return "error"
		}
		unit := time.Second
		if name == "PEXPIRE" {
			unit = time.Millisecond
		}
		at, ok := expiresAt(n, unit, false, now)
		if !ok {
			ss.err(errInvalidExpire(strings.ToLower(name)).Error())
			return "error"
		}
		if !s.node.SetExpires(key, at) {
			ss.integer(0)
			return "miss"
		}
		ss.integer(1)
	case "TTL", "PTTL":
		at, ok := s.node.Expires(key)
		switch {
		case !ok:
			ss.integer(-2)
			return "miss"
		case at == 0:
			ss.integer(-1)
		default:
			ms := max(at-now, 0) / int64(time.Millisecond)
			if name == "TTL" {
				ms = (ms + 500) / 1000 // Redis rounds to the nearest second
			}
			ss.integer(int(ms))
		}
		return "hit"
	case "PERSIST":
		at, ok := s.node.Expires(key)
		if !ok || at == 0 || !s.node.SetExpires(key, 0) {
			ss.integer(0)
			return "miss"
		}
		ss.integer(1)
	}
	return "ok"
}
