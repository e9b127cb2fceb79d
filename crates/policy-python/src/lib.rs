//! The Python module `registry_policy`: the registry's policy engine,
//! `registry-policy`, as it decides in the registry, for teams that embed it in Python.
//!
//! - `Policy(document)`: a dict or a JSON text; an invalid one raises `PolicyError`, whose
//!   `.errors` is the list of `{pointer, message}` (a required member that is missing is named
//!   by its own pointer, `/rules/0/claims/sub`);
//! - `Policy.evaluate(claims, service, ip=None, action=None) -> bool` and
//!   `Policy.explain(claims, service=None, ip=None, action=None) -> dict` (the body of the HTTP
//!   explain); `action` is an action's name (`"config:write"`, …), an unknown one a
//!   `ValueError`; `Policy.version` is 1 or 2;
//! - `lint(document) -> list[dict]` (`{code, severity, pointer, message}`);
//! - `compare(old, new) -> dict` (`{result, witnesses: [{rule, claims, service, ip?,
//!   action?}]}`), bounded, and interruptible (`KeyboardInterrupt`).
//!
//! Documents of version 1 and 2 are accepted, under the engine's size limits (checked before
//! anything is compiled).
//!
//! `lint` and `compare` take what `Policy()` takes (and a `Policy`). Documents and claims cross
//! the boundary as JSON, through Python's own `json` module: a value JSON cannot hold (a set, a
//! NaN) is a `TypeError` or `ValueError`, as `json.dumps` says.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use registry_policy as engine;
use serde_json::{Map, Value};
use std::net::IpAddr;

pyo3::create_exception!(
    registry_policy,
    PolicyError,
    PyValueError,
    "A document that is not a valid policy. `.errors` is the list of every problem found, each \
     a dict `{pointer, message}` whose RFC 6901 pointer points into the document."
);

/// `value` as JSON, through `json.dumps` (NaN and infinities refused).
fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = value.py();
    let options = PyDict::new(py);
    options.set_item("allow_nan", false)?;
    let text: String = py
        .import("json")?
        .call_method("dumps", (value,), Some(&options))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `value` as Python objects (dicts, lists, str, int, float, bool, None), through `json.loads`.
fn from_json<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?
        .call_method1("loads", (value.to_string(),))
}

/// The `PolicyError` of an error of the engine, with its `.errors`.
fn policy_error(py: Python<'_>, error: engine::PolicyError) -> PyErr {
    let message = error.to_string();
    let raised = PolicyError::new_err(message);
    let errors: PyResult<Bound<'_, PyList>> = (|| {
        let errors = PyList::empty(py);
        for violation in error.into_violations() {
            let item = PyDict::new(py);
            item.set_item("pointer", violation.pointer)?;
            item.set_item("message", violation.message)?;
            errors.append(item)?;
        }
        Ok(errors)
    })();
    match errors.and_then(|errors| raised.value(py).setattr("errors", errors)) {
        Ok(()) => raised,
        Err(error) => error,
    }
}

/// The policy of what `Policy()` takes: a `Policy`, a JSON text, or a document (a dict).
fn policy_of(document: &Bound<'_, PyAny>) -> PyResult<engine::Policy> {
    if let Ok(policy) = document.cast::<Policy>() {
        return Ok(policy.get().policy.clone());
    }
    let parsed = match document.cast::<PyString>() {
        Ok(text) => engine::Policy::parse_str(&text.to_cow()?),
        Err(_) => engine::Policy::parse(&to_json(document)?),
    };
    parsed
        .map(|parsed| parsed.policy)
        .map_err(|error| policy_error(document.py(), error))
}

/// The claims of a request: a dict, or `None` for a static token.
fn claims_of(claims: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Map<String, Value>>> {
    match claims.map(to_json).transpose()? {
        None => Ok(None),
        Some(Value::Object(claims)) => Ok(Some(claims)),
        Some(_) => Err(PyTypeError::new_err(
            "claims is a dict of the token's verified claims, or None for a static token",
        )),
    }
}

/// The client's address: a text (or an `ipaddress` object), or `None`: not checked.
fn ip_of(ip: Option<&Bound<'_, PyAny>>) -> PyResult<Option<IpAddr>> {
    let Some(ip) = ip else { return Ok(None) };
    let text = ip.str()?;
    let text = text.to_cow()?;
    text.parse()
        .map(Some)
        .map_err(|_| PyValueError::new_err(format!("{text:?} is not an IPv4 or IPv6 address")))
}

/// The action of a request: its name (`"config:write"`, …), or `None`: not checked.
fn action_of(action: Option<&str>) -> PyResult<Option<engine::Action>> {
    action
        .map(|name| {
            name.parse::<engine::Action>()
                .map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .transpose()
}

/// A parsed, compiled policy document (version 1 or 2).
///
/// `Policy(document)` takes a dict or a JSON text; a document that is not a valid policy raises
/// `PolicyError`, whose `.errors` lists every problem with its pointer.
#[pyclass(frozen, module = "registry_policy")]
#[derive(Debug)]
struct Policy {
    policy: engine::Policy,
}

#[pymethods]
impl Policy {
    #[new]
    fn new(document: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Policy {
            policy: policy_of(document)?,
        })
    }

    /// The version of the document: 2 when its `$schema` names the version-2 schema, else 1
    /// (which allows every action).
    #[getter]
    fn version(&self) -> u8 {
        self.policy.version()
    }

    /// Whether the policy admits a request: `claims` are the token's verified claims (a dict;
    /// `None` for a static token), `service` the subdomain the call acts on (`None` for a call
    /// on no one service, such as listing), `ip` the client's address (`None`: the
    /// `ip_allowlist` is not checked), `action` the action the call needs (`"config:write"`,
    /// …; `None`: not checked; an unknown name raises `ValueError`).
    #[pyo3(signature = (claims, service, ip=None, action=None))]
    fn evaluate(
        &self,
        claims: Option<&Bound<'_, PyAny>>,
        service: Option<&str>,
        ip: Option<&Bound<'_, PyAny>>,
        action: Option<&str>,
    ) -> PyResult<bool> {
        let claims = claims_of(claims)?;
        let ip = ip_of(ip)?;
        let action = action_of(action)?;
        // A request on the whole customer is judged as the registry judges it.
        let service = registry_policy::judged_service(service, action);
        Ok(self
            .policy
            .evaluate(claims.as_ref(), service, ip, action)
            .is_allowed())
    }

    /// Why the policy admits or refuses a request (the arguments of `evaluate`): the body of
    /// the registry's `POST /service-accounts/{id}/explain`, `{decision: "allow"|"deny", rule:
    /// {index, pointer}|None, reasons: [{code, message, rule?, pointer?}], hints: [{rule,
    /// pointer, message}]}`; a refused action is the reason `action-not-allowed`.
    #[pyo3(signature = (claims, service=None, ip=None, action=None))]
    fn explain<'py>(
        &self,
        py: Python<'py>,
        claims: Option<&Bound<'py, PyAny>>,
        service: Option<&str>,
        ip: Option<&Bound<'py, PyAny>>,
        action: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claims = claims_of(claims)?;
        let ip = ip_of(ip)?;
        let action = action_of(action)?;
        let service = registry_policy::judged_service(service, action);
        let explanation = self.policy.explain(claims.as_ref(), service, ip, action);
        from_json(py, &explanation.to_json())
    }

    fn __repr__(&self) -> String {
        format!("Policy({})", self.policy.document())
    }
}

/// The findings about a policy document (what `Policy()` takes): its schema violations as errors
/// (code `schema`) when it is not valid, else the lint's warnings; each a dict `{code,
/// severity, pointer, message}`. A text that is not JSON raises `PolicyError`.
#[pyfunction]
fn lint<'py>(document: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = document.py();
    let findings = if let Ok(policy) = document.cast::<Policy>() {
        policy.get().policy.lint()
    } else if let Ok(text) = document.cast::<PyString>() {
        let value = engine::json::parse_unique(text.to_cow()?.as_bytes())
            .map_err(|e| policy_error(py, engine::PolicyError::Json(e.to_string())))?;
        engine::lint_document(&value)
    } else {
        engine::lint_document(&to_json(document)?)
    };
    let findings: Vec<Value> = findings.iter().map(engine::Finding::to_json).collect();
    from_json(py, &Value::Array(findings))
}

/// Whether `new` admits a request `old` refuses (each what `Policy()` takes): `{result:
/// "narrower-or-equal"|"widens"|"undetermined", witnesses: [{rule, claims, service, ip?,
/// action?}]}`. `widens` always comes with requests `new` admits and `old` refuses;
/// `narrower-or-equal` only when proven. Its work is bounded (past its budget the answer is
/// `undetermined`), and it can be interrupted: a signal (Ctrl-C) raises `KeyboardInterrupt`
/// within a few milliseconds.
#[pyfunction]
fn compare<'py>(old: &Bound<'py, PyAny>, new: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = old.py();
    let (old, new) = (policy_of(old)?, policy_of(new)?);
    // Other Python threads run meanwhile; every few milliseconds of work the GIL is taken back
    // for a moment to run the signal handlers, and an exception they raise stops the work.
    let mut raised: Option<PyErr> = None;
    let comparison = py.detach(|| {
        let mut keep_going = || match Python::attach(|py| py.check_signals()) {
            Ok(()) => true,
            Err(error) => {
                raised = Some(error);
                false
            }
        };
        engine::compare_with(&old, &new, &mut keep_going)
    });
    if let Some(error) = raised {
        return Err(error);
    }
    from_json(py, &comparison.to_json())
}

/// The registry's service-account policy engine.
#[pymodule]
#[pyo3(name = "registry_policy")]
fn registry_policy_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Policy>()?;
    m.add("PolicyError", m.py().get_type::<PolicyError>())?;
    m.add_function(wrap_pyfunction!(lint, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
