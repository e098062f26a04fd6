--[[
gimbal job_submit.lua (slurm.conf: JobSubmitPlugins=lua; install as job_submit.lua next to
slurm.conf). Works with the Lua 5.1-5.4 that Slurm 22.05-26.05 link.

Users pass gimbal metadata in the job comment (sbatch --comment, or slurm_hooks/gsbatch):

    gimbal:app=bert,batch=64,iters=1000,est=3600,share=yes,deadline=1767225600,gate=1,gpus=2,batchrange=32:256

  key       value                         meaning
  app       [a-z0-9_-]{1,32}, required    model/application name (throughput profile key)
  batch     integer > 0                   global batch size
  iters     integer > 0                   iterations to run
  est       integer > 0                   estimated run time in seconds
  share     yes | no                      job accepts a shared GPU (shard/mps)
  deadline  integer > 0                   deadline, Unix epoch seconds
  gate      0 | 1                         gate mode: the job was submitted held (sbatch -H) and
                                          gimbal's daemon releases it; this script holds nothing
  gpus      integer 1..1024               GPUs the job needs; gate jobs are submitted without
                                          GRES and the daemon sets gpu:N (or shards) when it
                                          starts them
  stages    integer 1..64                 pipeline stages of a seed 003 Table I model (app
                                          vgg19, resnet152, ...): A-SRPT maps the stage
                                          replicas to GPUs (Heavy-Edge) and writes the stage
                                          of each GPU into the launcher decision
  batchrange MIN:MAX, 1 <= MIN <= batch <= MAX <= 1048576, needs batch
                                          the job allows the scheduler to change its global
                                          batch within MIN..MAX (gsbatch --allow-batch-change);
                                          without it the batch is never changed

Each key at most once, no spaces, at most 512 characters. On success the job's admin_comment
(which users cannot set) becomes the normalized, versioned tag the gimbal daemon reads:

    gimbal:v1;app=bert;batch=64;iters=1000;est=3600;share=yes;deadline=1767225600;gate=1;gpus=2;batchrange=32:256

(keys in this fixed order, absent keys left out, leading zeros dropped); the user's comment is
kept. A comment that starts with anything else is left alone; one that looks like gimbal
metadata but is malformed rejects the job with a message to the user (slurm.log_user) and error
code 22 (EINVAL: sbatch prints "Batch job submission failed: Invalid argument"). Slurm 22.05
exposes only a handful of ESLURM_* codes to Lua and none of them fits ("invalid licenses",
"invalid account", ...), so the errno value is used; it means the same on every release.
On modify (scontrol update comment=...) the same check runs; only root may renew the tag (a
user's update of a gimbal comment is refused: metadata is fixed at submission), and an
AdminComment that holds another tool's data (jobstats' JS1: summary) is never overwritten.

Constant work per job: one bounded string, no I/O, no os/io calls, no globals besides the two
Slurm entry points.
--]]

local PREFIX = "gimbal:"
local TAG = "gimbal:v1"
local MAX_LEN = 512
local EINVAL = 22
local MAX_GPUS = 1024
local MAX_STAGES = 64
local MAX_BATCH = 1048576
local ORDER = { "app", "batch", "iters", "est", "share", "deadline", "gate", "gpus", "stages",
                "batchrange" }
local FORMAT = "gimbal:app=NAME[,batch=N][,iters=N][,est=SECONDS][,share=yes|no]"
   .. "[,deadline=EPOCH][,gate=0|1][,gpus=N][,stages=N][,batchrange=MIN:MAX]"

local function positive_int(v)
   if not string.match(v, "^[0-9]+$") or #v > 12 then return nil end
   local s = string.gsub(v, "^0+", "")
   if s == "" then return nil end
   return s
end

local CHECK = {
   app = function(v)
      if #v >= 1 and #v <= 32 and string.match(v, "^[a-z0-9_%-]+$") then return v end
      return nil, "app must be 1-32 characters of a-z 0-9 _ -"
   end,
   batch = function(v)
      local s = positive_int(v); if s then return s end
      return nil, "batch must be an integer > 0"
   end,
   iters = function(v)
      local s = positive_int(v); if s then return s end
      return nil, "iters must be an integer > 0"
   end,
   est = function(v)
      local s = positive_int(v); if s then return s end
      return nil, "est must be a duration in seconds, an integer > 0"
   end,
   share = function(v)
      if v == "yes" or v == "no" then return v end
      return nil, "share must be yes or no"
   end,
   deadline = function(v)
      local s = positive_int(v); if s then return s end
      return nil, "deadline must be a Unix time in seconds, an integer > 0"
   end,
   gate = function(v)
      if v == "0" or v == "1" then return v end
      return nil, "gate must be 0 or 1"
   end,
   gpus = function(v)
      local s = positive_int(v)
      if s and #s <= 4 and tonumber(s) <= MAX_GPUS then return s end
      return nil, "gpus must be an integer from 1 to " .. MAX_GPUS
   end,
   stages = function(v)
      local s = positive_int(v)
      if s and #s <= 2 and tonumber(s) <= MAX_STAGES then return s end
      return nil, "stages must be an integer from 1 to " .. MAX_STAGES
   end,
   batchrange = function(v)
      local a, b = string.match(v, "^([0-9]+):([0-9]+)$")
      local lo, hi = a and positive_int(a), b and positive_int(b)
      if lo and hi and #lo <= 7 and #hi <= 7 and tonumber(lo) <= tonumber(hi)
            and tonumber(hi) <= MAX_BATCH then
         return lo .. ":" .. hi
      end
      return nil, "batchrange must be MIN:MAX with 1 <= MIN <= MAX <= " .. MAX_BATCH
   end,
}

-- Returns the normalized tag, or nil and an error message. Returns false for a comment that is
-- not gimbal metadata at all.
local function gimbal_parse(comment)
   if comment == nil or comment == "" then return false end
   if string.sub(comment, 1, #PREFIX) ~= PREFIX then
      -- "Gimbal:", " gimbal app=..." and the like are typos, not someone else's comment
      if string.match(string.lower(string.sub(comment, 1, 16)), "^%s*gimbal") then
         return nil, "gimbal metadata must start with exactly '" .. PREFIX .. "'"
      end
      return false
   end
   if #comment > MAX_LEN then
      return nil, "gimbal metadata longer than " .. MAX_LEN .. " characters"
   end
   local body = string.sub(comment, #PREFIX + 1)
   if body == "" then return nil, "no gimbal options after '" .. PREFIX .. "'" end
   local seen = {}
   for item in string.gmatch(body .. ",", "([^,]*),") do
      local k, v = string.match(item, "^([a-z]+)=(.*)$")
      if k == nil then
         if item == "" then return nil, "empty option (stray comma)" end
         return nil, "option '" .. string.sub(item, 1, 40) .. "' is not key=value"
      end
      local check = CHECK[k]
      if check == nil then
         return nil, "unknown gimbal option '" .. k .. "'"
      end
      if seen[k] ~= nil then return nil, "gimbal option '" .. k .. "' given twice" end
      local norm, err = check(v)
      if norm == nil then return nil, err .. " (got '" .. string.sub(v, 1, 40) .. "')" end
      seen[k] = norm
   end
   if seen.app == nil then return nil, "gimbal option 'app' is required" end
   if seen.batchrange ~= nil then
      -- the range is of the submitted batch: without one, nothing says what is being changed
      if seen.batch == nil then return nil, "batchrange needs batch (the submitted global batch)" end
      local lo, hi = string.match(seen.batchrange, "^([0-9]+):([0-9]+)$")
      local b = tonumber(seen.batch)
      if b < tonumber(lo) or b > tonumber(hi) then
         return nil, "batch " .. seen.batch .. " is outside batchrange " .. seen.batchrange
      end
   end
   local parts = { TAG }
   for _, k in ipairs(ORDER) do
      if seen[k] ~= nil then parts[#parts + 1] = k .. "=" .. seen[k] end
   end
   return table.concat(parts, ";")
end

local function reject(what, err, uid)
   local msg = "gimbal: invalid job comment: " .. err .. ". Expected " .. FORMAT
   slurm.log_user("%s", msg)
   slurm.log_info("gimbal job_submit: %s from uid %s rejected: %s", what, tostring(uid), err)
   return EINVAL
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local tag, err = gimbal_parse(job_desc.comment)
   if tag == false then return slurm.SUCCESS end
   if tag == nil then return reject("submit", err, submit_uid) end
   job_desc.admin_comment = tag
   return slurm.SUCCESS
end

local function refuse(what, err, uid)
   slurm.log_user("%s", "gimbal: " .. err)
   slurm.log_info("gimbal job_submit: %s from uid %s refused: %s", what, tostring(uid), err)
   return slurm.ESLURM_ACCESS_DENIED or EINVAL
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   local tag, err = gimbal_parse(job_desc.comment)
   if tag == false then return slurm.SUCCESS end
   if tag == nil then return reject("modify", err, modify_uid) end
   if modify_uid ~= 0 then
      -- Users cannot change AdminComment; without this refusal slurmctld denies only the
      -- AdminComment part and the Comment changes anyway.  Metadata is fixed at submission.
      return refuse("modify", "gimbal metadata is fixed at submission; cancel and resubmit "
         .. "the job (or ask an administrator) to change it", modify_uid)
   end
   local cur = job_rec and job_rec.admin_comment
   if cur ~= nil and cur ~= "" and string.sub(cur, 1, #PREFIX) ~= PREFIX then
      -- another tool's AdminComment (a jobstats JS1: summary, ...) is never overwritten
      return refuse("modify", "the job's AdminComment holds another tool's data; gimbal "
         .. "metadata not changed", modify_uid)
   end
   job_desc.admin_comment = tag
   return slurm.SUCCESS
end

return slurm.SUCCESS
