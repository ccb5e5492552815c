-- keylists.lua: the reply of the scripts that serve several locks in one
-- call, release.lua and extend.lua (each is layout.lua, this file, then its
-- own body), decoded by DecodeKeyLists on the Go side. It reads no KEYS or
-- ARGV.
--
-- note(lock, list, key) adds key to list 1 or 2 of lock number lock (the
-- script's header says what each list holds). keylists(locks) returns the
-- reply of a call of locks locks: 0 when no key was noted, else {first,
-- second, first, second, ...}, per lock in order its two lists, empty for a
-- lock that noted none.

-- noted: per lock (by its number) that noted some key, its two lists; nil
-- while none did.
local noted

local function note(lock, list, key)
  noted = noted or {}
  noted[lock] = noted[lock] or {{}, {}}
  local keys = noted[lock][list]
  keys[#keys + 1] = key
end

local function keylists(locks)
  if not noted then
    return 0
  end
  local out = {}
  for k = 1, locks do
    local lists = noted[k] or {{}, {}}
    out[#out + 1] = lists[1]
    out[#out + 1] = lists[2]
  end
  return out
end
