package kvredis

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Cluster URL schemes. go-redis reads a cluster from a redis:// URL with
// addr= parameters, which cannot be told from a single Redis; the scheme
// says it instead, spelled as the CRD's l2CacheLocalUrl already accepts
// (redis-cluster://), with rediss-cluster:// for TLS.
const (
	schemeCluster    = "redis-cluster"
	schemeClusterTLS = "rediss-cluster"
)

// NewClient returns a client for url whose calls end at their context's
// deadline: go-redis otherwise waits out its own 3s read timeout, which
// would be added to a request while Redis hangs.
//
// redis://, rediss:// and unix:// name one Redis (go-redis's ParseURL).
// redis-cluster://[user:password@]host:port[,host:port...][?addr=host:port...]
// (rediss-cluster:// for TLS) names a Redis or Valkey Cluster by seed
// nodes: any one that answers gives the client the whole slot map, which
// it reloads on MOVED and on failing nodes. Query parameters are
// go-redis's cluster options (dial_timeout, max_redirects, ...); a
// database other than 0 does not exist on a cluster and is refused.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != schemeCluster && scheme != schemeClusterTLS) {
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("kvredis: %w", err)
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClient(opts), nil
	}
	opts, err := parseClusterURL(strings.TrimSuffix(scheme, "-cluster"), rest)
	if err != nil {
		return nil, fmt.Errorf("kvredis: %s: %w", redactURL(rawURL), err)
	}
	opts.ContextTimeoutEnabled = true
	return redis.NewClusterClient(opts), nil
}

// parseClusterURL reads rest (the URL after "<scheme>-cluster://") with
// go-redis's cluster parser, the extra seeds of the host list moved into
// addr= parameters, which that parser reads.
func parseClusterURL(scheme, rest string) (*redis.ClusterOptions, error) {
	hostEnd := strings.IndexAny(rest, "/?")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	authority, tail := rest[:hostEnd], rest[hostEnd:]
	userinfo, hosts := "", authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	seeds := strings.Split(hosts, ",")
	for _, s := range seeds {
		if s == "" {
			return nil, errors.New("empty seed address")
		}
	}
	path, query, _ := strings.Cut(tail, "?")
	if db := strings.Trim(path, "/"); db != "" && db != "0" {
		return nil, fmt.Errorf("database %q: a cluster has database 0 only", db)
	}
	u, err := url.Parse(scheme + "://" + userinfo + seeds[0] + "?" + query)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	for _, s := range seeds[1:] {
		q.Add("addr", s)
	}
	u.RawQuery = q.Encode()
	return redis.ParseClusterURL(u.String())
}

// redactURL drops the password from a URL before it reaches an error.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return raw
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
}
