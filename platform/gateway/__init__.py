"""The OpenAI-compatible inference gateway: one request's path, step by step.

1. HTTP — `controller.py` (`/v1/chat/completions`, `/v1/completions`, `/v1/models`) and
   `responses_controller.py` (`/v1/responses`) take the request; `http.py` decodes the
   body (`schemas.py`), finds the caller's tenant and its limits (`limits.py`), and turns
   the answer into JSON or an SSE stream. The console's playground enters here too.
2. Resolution — `service.py` `Gateway.prepare` asks `resolve.py` what `model` names
   (base model, adapter, alias with its canary draw, or version), counts the prompt
   (`tokens.py`), checks the options (`options.py`) and the token limits.
3. Admission — `gate.py` `EngineGate.admit`: a place on the engines, decided by the
   admission core (`admission/core/`) over each engine's places (`admission/places.py`) and
   shared fairly between tenants (`admission/fair_share.py`); then the tenant's quotas and
   rate limits in Redis (`admission/service.py` `TenantQuotas`, with the TTFT estimate's
   shedding, `admission/overload.py`). The result is an `AdmittedRequest` holding its
   `AdmissionHandle` (`admission/handle.py`); every refusal happens here, before an engine
   is touched.
4. Placement — `Gateway.start` runs `pump.py` as a task of its own; `routing.py`
   `EngineRouter.prepare` asks the live placement (loraplex.serving.live) for an engine
   that has, or can load, the adapter: a `ReadyEngine`.
5. Engine driver — `pump.py` sends the request through the engine's driver
   (loraplex.serving.engines: SGLang, vLLM) with a deadline per phase, and retries on
   another engine while the client has seen nothing yet.
6. Relay — `buffer.py` holds what the engine sent; `relay.py` writes it to the client as
   SSE (`sse.py` for OpenAI's chunks, `responses_events.py` for the Responses API), with
   heartbeats, coalescing for slow readers, new requests first (`lane.py`), and a copy in
   Redis for resumable streams (`resume.py`). A whole answer is built by `replies.py`.
7. Usage — when the pump ends, `usage.py` counts the tokens (written to the database in
   batches) and `observe.py` records the request's metrics.
"""
