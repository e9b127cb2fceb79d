//! `/services` and `/services/{subdomain}`.

use crate::audit;
use crate::auth::{self, ServiceCaller};
use crate::body::{read_json, Fields};
use crate::directory;
use crate::problem::{ApiError, ApiResult, SERVICE_NAME_POINTER};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::audit::Action;
use registry_domain::limits::within_quota;
use registry_domain::naming::{check_service_name, registered_subdomain};
use registry_domain::{Service, Violation};

/// Longest title accepted.
pub const MAX_TITLE: usize = 200;
/// Longest description accepted.
pub const MAX_DESCRIPTION: usize = 2000;
/// Attempts at a free random name before giving up.
const RANDOM_NAME_ATTEMPTS: usize = 5;

/// `POST /services`: register a service.
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = auth::collection_caller(&state, &req).await?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["title", "serviceName", "description"])?;
    let title = fields.string("title", true, MAX_TITLE);
    // Length and label rules of serviceName belong to the naming module.
    let service_name = fields.string("serviceName", false, 1024);
    if let Some(Err(problem)) = service_name.as_deref().map(check_service_name) {
        fields
            .problems
            .push(Violation::new(SERVICE_NAME_POINTER, problem.to_string()));
    }
    let description = fields.string("description", false, MAX_DESCRIPTION);
    fields.finish()?;

    let customer_id = caller.customer_id();
    let customer = state
        .db(move |s| s.customer(customer_id))
        .await?
        .ok_or_else(|| auth::unauthorized("the caller's customer no longer exists"))?;
    let held = state.db(move |s| s.count_services_of(customer_id)).await?;
    within_quota("services", held, state.settings.max_services_per_customer)
        .map_err(ApiError::QuotaExceeded)?;
    let attempts = if service_name.is_some() {
        1
    } else {
        RANDOM_NAME_ATTEMPTS
    };
    for _ in 0..attempts {
        let subdomain = registered_subdomain(
            customer.plan,
            &customer.tenant,
            service_name.as_deref(),
            &state.rng,
        )?;
        if !caller.may_act_on(&subdomain) {
            return Err(ApiError::Forbidden(format!(
                "this service account's policy does not cover the subdomain {subdomain:?}"
            )));
        }
        let service = Service {
            id: uuid::Uuid::new_v4(),
            customer_id: Some(customer.id),
            subdomain,
            title: title.clone(),
            description: description.clone(),
            created_at: state.now(),
            expires_at: None,
        };
        let row = service.clone();
        let event = audit::service_event(
            &state,
            &req,
            &caller.who.actor(),
            Action::ServiceCreate,
            &row,
        );
        match state
            .db(move |s| s.create_service(&row, None, &event))
            .await
        {
            Ok(()) => {
                let location = format!("{}/services/{}", state.settings.base(), service.subdomain);
                return Ok(HttpResponse::Created()
                    .insert_header((header::LOCATION, location))
                    .json(views::service(&state, &service, state.now())));
            }
            Err(ApiError::Conflict(_)) if service_name.is_none() => continue,
            Err(ApiError::Conflict(_)) => {
                return Err(ApiError::Conflict(format!(
                    "the subdomain {:?} is already taken",
                    service.subdomain
                )))
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Conflict(
        "could not find a free random subdomain; retry".into(),
    ))
}

/// `GET /services`: the customer's services that the caller's patterns cover.
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let caller = auth::collection_caller(&state, &req).await?;
    let customer_id = caller.customer_id();
    let services = state.db(move |s| s.services_of(customer_id)).await?;
    let now = state.now();
    let visible: Vec<_> = services
        .iter()
        .filter(|s| caller.may_act_on(&s.subdomain))
        .map(|s| views::service(&state, s, now))
        .collect();
    Ok(HttpResponse::Ok().json(visible))
}

/// `GET /services/{subdomain}`.
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let service = auth::service_caller(&state, &req, &path).await?.service;
    Ok(HttpResponse::Ok().json(views::service(&state, &service, state.now())))
}

/// `PATCH /services/{subdomain}`: title and/or description.
pub async fn patch(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let ServiceCaller { mut service, who } = auth::service_caller(&state, &req, &path).await?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["title", "description"])?;
    let clears_description = fields.raw("description").is_some_and(|v| v.is_null());
    let title = fields.string("title", false, MAX_TITLE);
    let description = if clears_description {
        None
    } else {
        fields.string("description", false, MAX_DESCRIPTION)
    };
    fields.finish()?;
    if title.is_some() {
        service.title = title;
    }
    if description.is_some() || clears_description {
        service.description = description;
    }
    let row = service.clone();
    let action = audit::service_action(&service, Action::ServiceUpdate, Action::AnonymousUpdate);
    let event = audit::service_event(&state, &req, &who.actor(), action, &service);
    state
        .db(move |s| s.update_service(&row, &event))
        .await
        .map_err(|e| gone_as_not_found(e, &path))?;
    Ok(HttpResponse::Ok().json(views::service(&state, &service, state.now())))
}

/// `DELETE /services/{subdomain}`: the service, its configuration and its secret.
pub async fn delete(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let ServiceCaller { service, who } = auth::service_caller(&state, &req, &path).await?;
    let id = service.id;
    let action = audit::service_action(&service, Action::ServiceDelete, Action::AnonymousDelete);
    let event = audit::service_event(&state, &req, &who.actor(), action, &service);
    let deleted = state.db(move |s| s.delete_service(id, &event)).await?;
    directory::settle_write(&state).await;
    if !deleted {
        return Err(auth::not_found_service(&path));
    }
    Ok(HttpResponse::NoContent().finish())
}

/// A row that vanished between the check and the write is a 404, like any missing service.
pub(crate) fn gone_as_not_found(error: ApiError, key: &str) -> ApiError {
    match error {
        ApiError::NotFound(_) => auth::not_found_service(key),
        other => other,
    }
}
