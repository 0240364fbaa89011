package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// SumSamples adds up the samples of one metric in the Prometheus text
// format, over every label set, and says whether there was any.
func SumSamples(exposition []byte, name string) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // a comment, another metric, or a longer name
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			return 0, false, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metrics: %q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}
