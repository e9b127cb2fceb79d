//! The operator's commands, run where the registry runs and on its database, without the API:
//! `registry customer …` (`customers`, over the use cases of `registry_domain::app::customers`),
//! `registry audit` (`audit`: the trail, read), and `registry policy …` (`policy`: the policy
//! engine on local files). `serve` and `migrate` are `crate::app`'s.

pub mod audit;
pub mod customers;
pub mod policy;
