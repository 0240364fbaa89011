package kvredis

import "github.com/redis/go-redis/v9"

// Every script below touches a bounded number of keys: a batch's ops, or
// one chunk of a worker's set. Nothing walks a whole set inside Redis,
// which runs one script at a time and answers nobody meanwhile.

// luaLib is shared by the scripts. KEYS[4] is the worker's gen hash.
const luaLib = `
-- gen returns tier t's generation, creating it on first use. A new
-- generation starts at the server's clock (seconds * 1000), above any the
-- worker had before its gen hash was deleted (Forget), so entries of an
-- earlier life can never come back to life.
local function gen(t)
  local g = redis.call('HGET', KEYS[4], t)
  if not g then
    g = redis.call('TIME')[1] .. '000'
    redis.call('HSET', KEYS[4], t, g)
  end
  return g
end
-- bump kills every entry of tier t in O(1): lookups only count fields of
-- the current generation; collect removes the dead ones in chunks.
local function bump(t)
  gen(t)
  redis.call('HINCRBY', KEYS[4], t, 1)
end
-- holds reports whether block key k still has a field of worker (any
-- generation), i.e. whether it must stay in the worker's set.
local function holds(k, prefix)
  for _, f in ipairs(redis.call('HKEYS', k)) do
    if string.sub(f, 1, #prefix) == prefix then return true end
  end
  return false
end
`

// commitScript applies one batch once across replicas.
//
// KEYS: seq, reset, set and gen keys of the worker. ARGV: mark
// ("seq:hash"), reset flag ("0", "1" or "only"), block-key prefix,
// worker, ttl seconds, expect ("1" when the caller wrote a mark here
// before), then the ops as kind, tier, n, key1..keyn.
// Returns {applied, dead}: dead is 1 when a generation was bumped, so the
// caller collects the dead entries; applied is 2 when the expected mark
// is gone (Redis lost the worker's state): nothing is applied, and the
// caller rewrites the worker.
var commitScript = redis.NewScript(luaLib + `
local mark, reset, bprefix, worker, ttl, expect = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
local wprefix = worker .. '|'
if reset == 'only' then
  -- a restart seen before the new process's first batch: drop the old
  -- process and forget its sequence, so the new one's batches apply
  for t = 0, 2 do bump(t) end
  redis.call('DEL', KEYS[1])
  return {1, 1}
end
local seq = tonumber(string.match(mark, '^(%d+):'))
local cur = redis.call('GET', KEYS[1])
-- a restart's batch starts the worker afresh anyway
if not cur and expect == '1' and reset ~= '1' then return {2, 0} end
local dead = 0
if reset == '1' and redis.call('GET', KEYS[2]) ~= mark then
  -- this replica is the first to see the restart: drop the old process
  for t = 0, 2 do bump(t) end
  redis.call('SET', KEYS[2], mark)
  dead = 1
else
  -- applied already, by this or another replica
  if cur == mark then return {0, 0} end
  if cur then
    local cseq = tonumber(string.match(cur, '^(%d+):'))
    if cseq and cseq >= seq then return {0, 0} end
  end
end
local i = 7
while i <= #ARGV do
  local kind, tier, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if kind == 'c' then
    bump(tier)
    dead = 1
  end
  local field = wprefix .. tier .. '|' .. gen(tier)
  for j = 1, n do
    local k = ARGV[i + 2 + j]
    local bk = bprefix .. k
    if kind == 'a' then
      -- 0 when this add cancels a removal that overtook it (resync)
      if redis.call('HINCRBY', bk, field, 1) == 0 then redis.call('HDEL', bk, field) end
      redis.call('EXPIRE', bk, ttl)
      redis.call('SADD', KEYS[3], k)
    elseif kind == 'r' then
      local c = redis.call('HINCRBY', bk, field, -1)
      if c == 0 then
        redis.call('HDEL', bk, field)
      elseif c < 0 then
        -- a removal ahead of its add (a resync racing this batch): kept
        -- so the add cancels it, and left to expire if it never comes
        redis.call('EXPIRE', bk, ttl)
      end
      if not holds(bk, wprefix) then redis.call('SREM', KEYS[3], k) end
    end
  end
  i = i + 3 + n
end
redis.call('SET', KEYS[1], mark)
redis.call('EXPIRE', KEYS[3], ttl)
return {1, dead}
`)

// collectScript removes the dead entries (fields of an older generation)
// of one chunk of a worker's block keys, and drops from the worker's set
// the keys it no longer holds.
//
// KEYS: seq, reset, set and gen keys of the worker. ARGV: block-key
// prefix, worker, then the chunk's keys.
var collectScript = redis.NewScript(luaLib + `
local bprefix, wprefix = ARGV[1], ARGV[2] .. '|'
local g = redis.call('HMGET', KEYS[4], '0', '1', '2')
for i = 3, #ARGV do
  local bk = bprefix .. ARGV[i]
  local live = false
  for _, f in ipairs(redis.call('HKEYS', bk)) do
    if string.sub(f, 1, #wprefix) == wprefix then
      local t, fg = string.match(string.sub(f, #wprefix + 1), '^(%d)|(%d+)$')
      if t and g[tonumber(t) + 1] == fg then
        live = true
      else
        redis.call('HDEL', bk, f)
      end
    end
  end
  if not live then redis.call('SREM', KEYS[3], ARGV[i]) end
end
return 1
`)

// resyncScript starts rewriting a worker from this replica's view: it
// kills the worker's entries (a new generation in every tier) and claims
// the batch mark, unless another replica already applied a later batch
// (then this one is behind, and retries on a later batch).
//
// KEYS: seq, reset, set and gen keys. ARGV: mark, reset flag ("0"/"1").
// Returns the new generations, or an empty array when behind.
var resyncScript = redis.NewScript(luaLib + `
local mark, reset = ARGV[1], ARGV[2]
local seq = tonumber(string.match(mark, '^(%d+):'))
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= mark then
  local cseq = tonumber(string.match(cur, '^(%d+):'))
  if cseq and cseq > seq then return {} end
end
for t = 0, 2 do bump(t) end
redis.call('SET', KEYS[1], mark)
if reset == '1' then redis.call('SET', KEYS[2], mark) end
return {gen(0), gen(1), gen(2)}
`)

// loadScript writes one chunk of a worker's blocks in the generations a
// resync created; it writes nothing when they changed since (another
// replica's resync took over, and writes its own view).
//
// KEYS: seq, reset, set and gen keys. ARGV: block-key prefix, worker,
// ttl seconds, the three expected generations, then key, tier, copies
// triples. Returns 0 when superseded.
var loadScript = redis.NewScript(luaLib + `
local bprefix, wprefix, ttl = ARGV[1], ARGV[2] .. '|', tonumber(ARGV[3])
local g = redis.call('HMGET', KEYS[4], '0', '1', '2')
if g[1] ~= ARGV[4] or g[2] ~= ARGV[5] or g[3] ~= ARGV[6] then return 0 end
for i = 7, #ARGV, 3 do
  local k, t, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local bk, field = bprefix .. k, wprefix .. t .. '|' .. g[tonumber(t) + 1]
  -- added to what later batches of other replicas put there meanwhile
  if redis.call('HINCRBY', bk, field, n) == 0 then redis.call('HDEL', bk, field) end
  redis.call('EXPIRE', bk, ttl)
  redis.call('SADD', KEYS[3], k)
end
redis.call('EXPIRE', KEYS[3], ttl)
return 1
`)

// lookupScript reads, block by block, which tiers of one part hold each
// of a prompt's block keys with a live entry (a field of its worker's
// current generation), down to the first block the part does not hold.
//
// KEYS: the part's gen-key prefix: a field's worker w has its
// generations at KEYS[1] .. w (a worker's own part names no worker, so
// that is its gen key). ARGV: block-key prefix, then the block keys.
// Returns one digit per block read: bit t set when tier t holds it.
var lookupScript = redis.NewScript(`
local bprefix = ARGV[1]
local gens, out = {}, {}
for i = 2, #ARGV do
  local f = redis.call('HGETALL', bprefix .. ARGV[i])
  local held = {0, 0, 0}
  for j = 1, #f, 2 do
    if (tonumber(f[j + 1]) or 0) > 0 then
      local w, t, g = string.match(f[j], '^(.*)|(%d)|(%d+)$')
      if w then
        local cur = gens[w]
        if not cur then
          cur = redis.call('HMGET', KEYS[1] .. w, '0', '1', '2')
          gens[w] = cur
        end
        local ti = tonumber(t)
        if ti <= 2 and cur[ti + 1] == g then held[ti + 1] = 2 ^ ti end
      end
    end
  end
  local d = held[1] + held[2] + held[3]
  out[#out + 1] = string.char(48 + d)
  if d == 0 then break end
end
return table.concat(out)
`)
