-- Test harness: runs slurm_hooks/job_submit.lua outside slurmctld with a fake `slurm` table.
--   lua5.1 fake_slurm.lua <path/to/job_submit.lua>
-- stdin: one case per line, "<submit|modify|modify_root> <hex comment> [<hex admin_comment of
-- the job>]" (hex so any bytes fit; "-" = nil, "~" = empty string); modify runs as uid 1000,
-- modify_root as uid 0
-- stdout: one line per case, "rc=<n> admin=<hex>|- user=<hex>|-" (user = last log_user text)
local script = arg[1]

local function hex(s)
   return (string.gsub(s, ".", function(c) return string.format("%02x", string.byte(c)) end))
end
local function unhex(h)
   return (string.gsub(h, "%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

local last_user = nil
slurm = {
   SUCCESS = 0, ERROR = -1, FAILURE = -1,
   ESLURM_INVALID_LICENSES = 2048, ESLURM_ACCESS_DENIED = 2002,
   log_user = function(fmt, ...) last_user = string.format(fmt, ...) end,
   log_info = function(fmt, ...) local _ = string.format(fmt, ...) end,
   log_debug = function(fmt, ...) local _ = string.format(fmt, ...) end,
   log_error = function(fmt, ...) local _ = string.format(fmt, ...) end,
}
-- like slurmctld: the script must not touch io/os (it would fail here loudly)
local real_io, real_os = io, os
io, os = nil, nil
local chunk = assert(loadfile(script))
local load_rc = chunk()
io, os = real_io, real_os
assert(load_rc == slurm.SUCCESS, "script did not return slurm.SUCCESS")
assert(type(slurm_job_submit) == "function" and type(slurm_job_modify) == "function")

for line in io.lines() do
   local mode, c, a = string.match(line, "^([%a_]+) (%S+) ?(%S*)$")
   local comment = nil
   if c == "~" then comment = "" elseif c ~= "-" then comment = unhex(c) end
   local rec_admin = nil
   if a ~= nil and a ~= "" and a ~= "-" then rec_admin = (a == "~") and "" or unhex(a) end
   local job_desc = { comment = comment, admin_comment = nil }
   last_user = nil
   local saved_io, saved_os = io, os
   io, os = nil, nil
   local ok, rc
   if mode == "submit" then
      ok, rc = pcall(slurm_job_submit, job_desc, {}, 1000)
   else
      local uid = (mode == "modify_root") and 0 or 1000
      ok, rc = pcall(slurm_job_modify, job_desc,
         { job_id = 7, comment = "old", admin_comment = rec_admin }, {}, uid)
   end
   io, os = saved_io, saved_os
   if not ok then
      print("crash " .. hex(tostring(rc)))
   else
      print(string.format("rc=%s admin=%s user=%s", tostring(rc),
         job_desc.admin_comment and hex(job_desc.admin_comment) or "-",
         last_user and hex(last_user) or "-"))
   end
end
