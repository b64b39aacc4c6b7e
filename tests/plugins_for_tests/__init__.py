"""Plugin modules used by the tests of the plugin contract (registered through patched entry points)."""
