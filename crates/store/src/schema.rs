//! The tables of `migrations/{sqlite,postgres}`, in the column types both backends share.

diesel::table! {
    customers (id) {
        id -> Text,
        name -> Text,
        tenant -> Text,
        plan -> Text,
        created_at -> BigInt,
        disabled_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    services (id) {
        id -> Text,
        customer_id -> Nullable<Text>,
        subdomain -> Text,
        title -> Nullable<Text>,
        description -> Nullable<Text>,
        created_at -> BigInt,
        expires_at -> Nullable<BigInt>,
        config_removed_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    service_accounts (id) {
        id -> Text,
        customer_id -> Text,
        name -> Text,
        kind -> Text,
        policy -> Text,
        created_at -> BigInt,
        last_used_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    account_issuers (issuer, account_id) {
        issuer -> Text,
        account_id -> Text,
    }
}

diesel::table! {
    credentials (lookup_id) {
        lookup_id -> Text,
        hash -> Text,
        account_id -> Nullable<Text>,
        service_id -> Nullable<Text>,
    }
}

diesel::table! {
    published_configs (service_id) {
        service_id -> Text,
        openid_configuration -> Text,
        jwks -> Text,
        updated_at -> BigInt,
        key_state -> Text,
        key_expires_at -> Nullable<BigInt>,
        previous_change_at -> Nullable<BigInt>,
        discovery_changed_at -> Nullable<BigInt>,
        jwks_changed_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    changes (seq) {
        seq -> BigInt,
        kind -> Text,
        subject_id -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    audit_events (seq) {
        seq -> BigInt,
        id -> Text,
        customer_id -> Nullable<Text>,
        at -> BigInt,
        action -> Text,
        resource_type -> Text,
        resource_id -> Text,
        subdomain -> Nullable<Text>,
        actor_kind -> Text,
        actor_account_id -> Nullable<Text>,
        actor_iss -> Nullable<Text>,
        actor_sub -> Nullable<Text>,
        ip -> Nullable<Text>,
        request_id -> Nullable<Text>,
        changes -> Nullable<Text>,
    }
}

diesel::table! {
    refusals (seq) {
        seq -> BigInt,
        account_id -> Text,
        at -> BigInt,
        refusal -> Text,
        near -> Bool,
    }
}

diesel::joinable!(account_issuers -> service_accounts (account_id));
diesel::joinable!(published_configs -> services (service_id));

diesel::allow_tables_to_appear_in_same_query!(
    customers,
    services,
    service_accounts,
    account_issuers,
    credentials,
    published_configs,
    changes,
    audit_events,
    refusals,
    fetch_counts,
    fetch_agents,
    fetch_networks,
    key_readiness,
    purges,
    custom_domains,
    acme_challenges,
    acme_accounts,
    acme_orders,
    managed_signing,
    rate_counts,
    subdomain_removals,
);

diesel::table! {
    managed_signing (service_id) {
        service_id -> Text,
        state -> Text,
        due_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    acme_orders (directory, domain, at) {
        directory -> Text,
        domain -> Text,
        at -> BigInt,
        customer_id -> Nullable<Text>,
        renewal -> Bool,
    }
}

diesel::table! {
    custom_domains (service_id) {
        service_id -> Text,
        domain -> Text,
        status -> Text,
        txt_token -> Text,
        created_at -> BigInt,
        next_attempt_at -> BigInt,
        attempts -> Integer,
        error_code -> Nullable<Text>,
        error_message -> Nullable<Text>,
        certificate_chain -> Nullable<Text>,
        certificate_key -> Nullable<Text>,
        not_before -> Nullable<BigInt>,
        not_after -> Nullable<BigInt>,
        certificate_issuer -> Nullable<Text>,
        locked_until -> Nullable<BigInt>,
    }
}

diesel::table! {
    acme_challenges (domain, token) {
        domain -> Text,
        token -> Text,
        key_authorization -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    acme_accounts (directory) {
        directory -> Text,
        credentials -> Text,
    }
}

diesel::table! {
    fetch_counts (service_id, document, hour) {
        service_id -> Text,
        document -> Text,
        hour -> BigInt,
        ok -> BigInt,
        not_modified -> BigInt,
        last_at -> BigInt,
    }
}

diesel::table! {
    fetch_agents (service_id, document, hour, agent) {
        service_id -> Text,
        document -> Text,
        hour -> BigInt,
        agent -> Text,
        count -> BigInt,
        last_at -> BigInt,
    }
}

diesel::table! {
    fetch_networks (service_id, document, hour, agent, network) {
        service_id -> Text,
        document -> Text,
        hour -> BigInt,
        agent -> Text,
        network -> Text,
        last_at -> BigInt,
    }
}

diesel::table! {
    key_readiness (service_id, kid) {
        service_id -> Text,
        kid -> Text,
        safe_at -> BigInt,
    }
}

diesel::table! {
    purges (service_id) {
        service_id -> Text,
        changed_at -> BigInt,
    }
}

diesel::table! {
    rate_counts (limit_name, subject, replica, minute) {
        limit_name -> Text,
        subject -> Text,
        replica -> Text,
        minute -> BigInt,
        events -> BigInt,
        written_at -> BigInt,
    }
}

diesel::table! {
    subdomain_removals (subdomain) {
        subdomain -> Text,
        removed_at -> BigInt,
    }
}
