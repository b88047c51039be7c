"""The queue and the worker: what travels (contract), the embedded queue (memory), the Redis Streams queue
(redis_api for the API's side, redis_worker for a worker's; keys and scripts its layout), what workers count
(counters), and the worker loop with continuous batching (worker)."""
