//! `/services` and `/services/{subdomain}`: parse, call the use case of
//! `registry_domain::app::services`, shape the answer.

use crate::body::{read_json, Bodiless, Fields};
use crate::caller::{Collection, ServiceCaller};
use crate::problem::{ApiError, ApiResult, SERVICE_NAME_POINTER};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::services::{self, CreateService, UpdateService};
use registry_domain::app::services::{MAX_DESCRIPTION, MAX_TITLE};
use registry_domain::app::AppError;
use registry_domain::naming::check_service_name;
use registry_domain::text::TextKind;
use registry_domain::Violation;
use serde::Deserialize;
use serde_json::Value;

/// `POST /services`: register a service.
pub async fn create(
    Collection(caller): Collection,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["title", "serviceName", "description"])?;
    let title = fields.text("title", true, MAX_TITLE, TextKind::Line);
    // A name sent on a plan that does not choose one is refused as such, whatever it is (a
    // string or not, valid or not) and whatever else the body gets wrong.
    if fields.raw("serviceName").is_some() {
        let asking = caller.clone();
        state
            .read(move |registry| services::may_choose_service_name(registry, &asking))
            .await?;
    }
    // Length and label rules of serviceName belong to the naming module.
    let service_name = fields.string("serviceName", false, 1024);
    if let Some(Err(problem)) = service_name.as_deref().map(check_service_name) {
        fields
            .problems
            .push(Violation::new(SERVICE_NAME_POINTER, problem.to_string()));
    }
    let description = fields.text("description", false, MAX_DESCRIPTION, TextKind::Paragraph);
    fields.finish()?;
    let command = CreateService {
        title,
        service_name,
        description,
    };
    let now = state.now();
    let asking = caller.clone();
    let created = state
        .write(move |registry| Ok(services::create(registry, &asking, command, now)))
        .await?;
    let service = match created {
        Ok(service) => service,
        Err(AppError::NotCovered { subdomain }) => {
            let action = registry_domain::policy::Action::ServicesWrite;
            state
                .auth
                .refused_creation(&caller, &subdomain, action)
                .await;
            return Err(AppError::NotCovered { subdomain }.into());
        }
        Err(other) => return Err(other.into()),
    };
    let location = format!("{}/services/{}", state.settings.base(), service.subdomain);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .json(views::service(&state, &service, now)))
}

/// `?include=`: what a list adds to each service.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    include: Option<String>,
}

/// `GET /services[?include=status]`: the customer's services that the caller's patterns cover;
/// with `include=status`, each with its [`views::service_status`] (the console's list, in one
/// request), `null` where the caller may not read the service's configuration. The query comes first: a malformed one is a 400 before any authentication.
pub async fn list(
    query: web::Query<ListQuery>,
    Collection(caller): Collection,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let shown: Vec<_> = match query.into_inner().include.as_deref() {
        None => state
            .read(move |registry| services::list(registry, &caller))
            .await?
            .iter()
            .map(|s| views::service(&state, s, now))
            .collect(),
        Some("status") => state
            .read(move |registry| services::list_with_status(registry, &caller, now))
            .await?
            .iter()
            .map(|(service, status)| {
                let mut shown = views::service(&state, service, now);
                shown["status"] = status.as_ref().map_or(Value::Null, views::service_status);
                shown
            })
            .collect(),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "query parameter include: {other:?} is not one of: status"
            )))
        }
    };
    Ok(HttpResponse::Ok().json(shown))
}

/// `GET /services/{subdomain}`.
pub async fn get(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(views::service(&state, &service, state.now())))
}

/// `PATCH /services/{subdomain}`: title and/or description.
pub async fn patch(
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["title", "description"])?;
    let clears_description = fields.raw("description").is_some_and(|v| v.is_null());
    let title = fields.text("title", false, MAX_TITLE, TextKind::Line);
    let description = if clears_description {
        Some(None)
    } else {
        fields
            .text("description", false, MAX_DESCRIPTION, TextKind::Paragraph)
            .map(Some)
    };
    fields.finish()?;
    let command = UpdateService { title, description };
    let now = state.now();
    let service = state
        .write(move |registry| services::update(registry, &caller, &service, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(views::service(&state, &service, now)))
}

/// `DELETE /services/{subdomain}`: the service, its configuration and its secret.
pub async fn delete(
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let (id, subdomain) = (service.id, service.subdomain.clone());
    let domains = state.replica.served_domains(id);
    state
        .write(move |registry| services::delete(registry, &caller, &service, now))
        .await?;
    state.replica.documents_gone(id, &subdomain, domains);
    Ok(HttpResponse::NoContent().finish())
}
