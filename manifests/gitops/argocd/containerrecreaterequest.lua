-- Argo CD health of a ContainerRecreateRequest (apps.kruise.io, v1alpha1 or v1beta1): Healthy once
-- Completed with every container recreated, Degraded once Completed otherwise, Progressing before.
-- Tested by tests/e2e/tests/gitops.rs (Lua 5.1, as Argo CD's gopher-lua) on captured objects.
local hs = {}
local status = obj.status
if status == nil or status.phase == nil or status.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the node daemon to pick the request up"
  return hs
end
if status.phase ~= "Completed" and status.phase ~= "Succeeded" and status.phase ~= "Failed" then
  hs.status = "Progressing"
  hs.message = status.phase
  return hs
end
-- v1beta1: the Succeeded condition says it.
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Succeeded" then
      if condition.status == "True" then
        hs.status = "Healthy"
      else
        hs.status = "Degraded"
      end
      hs.message = condition.message
      return hs
    end
  end
end
-- v1alpha1: crr's conditions travel in an annotation, as JSON (a condition's fields in their
-- order, `status` just before `type`).
local annotations = obj.metadata.annotations
local carried = annotations and annotations["crr.apps.kruise.io/status-conditions"]
if carried ~= nil then
  local succeeded = string.match(carried, '"status":"(%a+)","type":"Succeeded"')
  if succeeded == "True" then
    hs.status = "Healthy"
    hs.message = status.message or "Completed"
    return hs
  elseif succeeded ~= nil then
    hs.status = "Degraded"
    hs.message = status.message or "not every container was recreated"
    return hs
  end
end
-- Otherwise (a request OpenKruise completed): every container recreated, or not.
if status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = status.message
  return hs
end
if status.containerRecreateStates ~= nil then
  for _, state in ipairs(status.containerRecreateStates) do
    if state.phase ~= "Succeeded" then
      hs.status = "Degraded"
      hs.message = state.name .. " " .. (state.phase or "not recreated")
      if state.message ~= nil and state.message ~= "" then
        hs.message = hs.message .. ": " .. state.message
      elseif status.message ~= nil and status.message ~= "" then
        hs.message = hs.message .. ": " .. status.message
      end
      return hs
    end
  end
end
hs.status = "Healthy"
hs.message = status.message or "Completed"
return hs
