# The registries behind the cache, and the addresses that may PURGE (the registries'): copy to
# backends.vcl beside registry.vcl and edit. Timeouts of a second: past them the cache answers
# from its copy.
import directors;

# Readiness, not liveness: a replica that starts or drains answers 503 there, and the cache
# sends its requests to the others.
probe registry_ready {
    .url = "/readyz";
    .interval = 1s;
    .timeout = 500ms;
    .window = 3;
    .threshold = 2;
}

backend registry_a {
    .host = "10.0.0.11";
    .port = "8080";
    .connect_timeout = 500ms;
    .first_byte_timeout = 1s;
    .between_bytes_timeout = 1s;
    .probe = registry_ready;
}

backend registry_b {
    .host = "10.0.0.12";
    .port = "8080";
    .connect_timeout = 500ms;
    .first_byte_timeout = 1s;
    .between_bytes_timeout = 1s;
    .probe = registry_ready;
}

acl purgers {
    "10.0.0.11";
    "10.0.0.12";
}

sub vcl_init {
    new registries = directors.round_robin();
    registries.add_backend(registry_a);
    registries.add_backend(registry_b);
}
