-- Argo CD health of a ContainerRecreateRollout (crr.dev): Healthy once Completed, Degraded once
-- Failed or Aborted, Suspended while paused, Progressing otherwise (and while the operator has not yet
-- observed the newest spec). Tested by tests/e2e/tests/gitops.rs (Lua 5.1, as Argo CD's
-- gopher-lua) on captured objects.
local hs = {}
local status = obj.status
local function condition(type)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator"
  return hs
end
if status.phase == "Failed" or status.phase == "Aborted" then
  -- Why: the Failed condition of a failed rollout, the Stalled one of an aborted one.
  local why = condition(status.phase == "Failed" and "Failed" or "Stalled")
  hs.status = "Degraded"
  hs.message = (why and why.message) or status.phase
  return hs
end
if status.phase == "Completed" then
  local complete = condition("Complete")
  hs.status = "Healthy"
  hs.message = (complete and complete.message) or "Completed"
  return hs
end
if obj.metadata.generation ~= nil and status.observedGeneration ~= nil
    and status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the newest spec"
  return hs
end
if status.phase == "Paused" or (obj.spec ~= nil and obj.spec.paused) then
  hs.status = "Suspended"
  hs.message = "Paused at " .. (status.progress or "0/0") .. " pods"
  return hs
end
local progressing = condition("Progressing")
hs.status = "Progressing"
hs.message = (status.progress or "0/0") .. " pods recreated"
if progressing ~= nil and progressing.message ~= nil and progressing.message ~= "" then
  hs.message = hs.message .. ": " .. progressing.message
end
return hs
