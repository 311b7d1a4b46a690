//! Fuzz the config loader: any bytes must give a `Config` or a `ConfigError`, never a
//! panic or a hang, and every diagnostic must point inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sortie::config::{Config, ConfigError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let env = |name: &str| (name == "SET").then(|| "value".to_string());
    match Config::parse_str_with_env(text, None, &env) {
        Ok(_) => {}
        Err(ConfigError::Invalid { diagnostics }) => {
            // YAML breaks lines at \n, \r\n and a lone \r, so diagnostics count lines that way.
            let lines = text.replace("\r\n", "\n").replace('\r', "\n").split('\n').count() + 1;
            for d in diagnostics {
                assert!(d.line >= 1 && d.line <= lines, "diagnostic line {} outside the input ({lines} lines)", d.line);
            }
        }
        Err(ConfigError::Read { .. }) => unreachable!("no file is read"),
    }
});
