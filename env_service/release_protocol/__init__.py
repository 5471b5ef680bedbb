"""The release protocol: the original SEAL release's protocol, for its clients.

`/create /step /evaluate /release /get_info /get_env_profile`, each a POST of `{env_type,
task_id, instance_id, messages, params}` answered `{success, data, error}`, as the release's
trainer (AgentEvolver's env client) speaks it, over the native API's engine; served while
`ServiceConfig.release_protocol` is on (the default; `--no-release-protocol`). api.py: the
routes and every difference from the release on purpose; params.py: the `/create` params
(and this service's flat keys) as settings; compat.py: the release's task ids, splits and
replies. The capability-state file: env_service/release_capability_file.py, below this package.
"""
