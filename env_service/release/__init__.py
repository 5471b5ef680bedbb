"""The original SEAL release's wire protocol, for its clients.

`/create /step /evaluate /release /get_info /get_env_profile`, each a POST of `{env_type,
task_id, instance_id, messages, params}` answered `{success, data, error}`, as the
release's trainer (AgentEvolver's env client) speaks it, over the same engine as the
native API. Served while `ServiceConfig.release_protocol` is on (the default;
`--no-release-protocol` turns it off).

- api.py: the routes, and every difference from the release on purpose;
- params.py: the release's `/create` params (and this service's flat keys) as settings;
- compat.py: the release's task ids, splits and replies, in this service's terms.

The release's capability-state file and its guideline selection are
env_service/release_state.py, below both this package and profile_source.py, which reads the
file for `--capability-state`.
"""
