//! The capacity trials (`src/capacity.rs`), run as the bench runs them: a child process of
//! the bench binary per trial, on small models.

use std::process::{Command, Output};

use serde_json::{Value, json};

/// Runs one trial; its outcome, or its output where it did not train.
fn trial(
    config: &Value,
    way: &str,
    budget: Option<u64>,
    cap: Option<u64>,
) -> Result<Value, Output> {
    let trial = json!({
        "backend": "flex",
        "config": config,
        "way": way,
        "budget_bytes": budget,
        "steps": 3,
        "cap_bytes": cap,
        "find_smallest": way == "SaveAll",
    });
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--capacity-child", &trial.to_string()])
        .output()
        .expect("the bench binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    match stdout.lines().find_map(|l| l.strip_prefix("CAPACITY ")) {
        Some(line) if output.status.success() => {
            Ok(serde_json::from_str(line).expect("an outcome"))
        }
        _ => Err(output),
    }
}

fn mlp() -> Value {
    json!({"kind": "mlp", "batch": 8, "layers": 3, "width": 32, "seq": 0, "heads": 0, "d_ff": 0})
}

fn lstm() -> Value {
    json!({"kind": "lstm", "batch": 2, "layers": 1, "width": 8, "seq": 12, "heads": 0, "d_ff": 4})
}

fn hash(outcome: &Value) -> String {
    outcome["weights_hash"]
        .as_str()
        .expect("a hash")
        .to_string()
}

/// The update inside backward and the separate update give the same weights bit for bit
/// after three Adam steps, under SaveAll and under the smallest budget; the budget replays.
#[test]
fn every_remat_way_trains_to_the_same_weights() {
    for config in [mlp(), lstm()] {
        let saveall = trial(&config, "SaveAll", None, None).expect("SaveAll trains");
        let smallest = saveall["smallest"].as_u64().expect("a smallest budget");
        let in_backward = trial(&config, "SaveAllInBackward", None, None).expect("trains");
        let budget = trial(&config, "Budget", Some(smallest), None).expect("trains");
        let both = trial(&config, "BudgetInBackward", Some(smallest), None).expect("trains");
        for other in [&in_backward, &budget, &both] {
            assert_eq!(hash(other), hash(&saveall), "{config}");
        }
        let replays = budget["replays"].as_array().expect("replays");
        assert!(
            replays.iter().all(|r| r.as_u64() > Some(0)),
            "{config}: {replays:?}"
        );
        assert_eq!(saveall["step_ns"].as_array().map(Vec::len), Some(3));
    }
}

/// Burn's autodiff trains through every step, and the update inside backward holds fewer
/// bytes at the step's peak than the separate one, whose gradients are all alive at the end
/// of backward.
#[test]
fn burn_trains_and_the_update_inside_backward_lowers_the_step_peak() {
    let config = mlp();
    let burn = trial(&config, "BurnNone", None, None).expect("Burn trains");
    assert_eq!(burn["step_ns"].as_array().map(Vec::len), Some(3));
    let saveall = trial(&config, "SaveAll", None, None).expect("SaveAll trains");
    let smallest = saveall["smallest"].as_u64().expect("a smallest budget");
    let separate = trial(&config, "Budget", Some(smallest), None).expect("trains");
    let inside = trial(&config, "BudgetInBackward", Some(smallest), None).expect("trains");
    let peak = |o: &Value| {
        o["step_peaks"].as_array().expect("peaks")[2]
            .as_u64()
            .expect("bytes")
    };
    assert!(
        peak(&inside) < peak(&separate),
        "{} against {}",
        peak(&inside),
        peak(&separate)
    );
}

/// Under a cap below what the model needs, the child aborts on the allocation that would
/// pass it; with the cap at the process's own peak it trains.
#[test]
fn a_cap_stops_the_trial_that_needs_more() {
    let config = mlp();
    let free = trial(&config, "SaveAll", None, None).expect("trains without a cap");
    let peak = free["process_peak"].as_u64().expect("a peak");
    let capped = trial(&config, "SaveAll", None, Some(peak + (1 << 20))).expect("trains");
    assert_eq!(hash(&capped), hash(&free));
    let failed = trial(&config, "SaveAll", None, Some(peak / 2)).expect_err("over the cap");
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("memory allocation of"), "{stderr}");
}

/// `REMAT_BENCH_PEAK_TRACE=1` (`src/peak_trace.rs`): the trial prints the buffers of 512 KiB
/// or more live at its last step's peak, each with the kernel and remat's frames that made
/// it, and they add up to at most the step's peak. Here an MLP of 512 KiB activations under
/// SaveAll; the peak of its first step is in Adam's update, where every buffer comes from a
/// Burn kernel the bench's update called.
#[test]
fn the_peak_trace_names_the_buffers_live_at_the_peak() {
    let config = json!({"kind": "mlp", "batch": 256, "layers": 2, "width": 512, "seq": 0, "heads": 0, "d_ff": 0});
    let trial = json!({
        "backend": "flex", "config": config, "way": "SaveAll", "budget_bytes": null,
        "steps": 1, "cap_bytes": null, "find_smallest": false,
    });
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--capacity-child", &trial.to_string()])
        .env("REMAT_BENCH_PEAK_TRACE", "1")
        .output()
        .expect("the bench binary runs");
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outcome: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CAPACITY "))
        .map(|l| serde_json::from_str(l).expect("an outcome"))
        .expect("the trial trained");
    let peak = outcome["step_peaks"][0].as_u64().expect("a peak") as f64 / 1048576.0;
    let header = stderr
        .lines()
        .find(|l| l.starts_with("peak trace: "))
        .unwrap_or_else(|| panic!("no peak trace in {stderr}"));
    let buffers: Vec<f64> = stderr
        .lines()
        .filter(|l| l.trim_start().contains(" MiB #"))
        .map(|l| l.split_whitespace().next().unwrap().parse().expect("MiB"))
        .collect();
    assert!(!buffers.is_empty(), "{stderr}");
    assert!(buffers.iter().all(|&b| b >= 0.5), "{stderr}");
    let traced: f64 = buffers.iter().sum();
    assert!(
        traced <= peak + 0.01,
        "{traced} MiB traced, a {peak} MiB peak: {header}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(" MiB #")).collect();
    let named = lines
        .iter()
        .filter(|l| l.contains("burn") && (l.contains("remat") || l.contains("bench::")))
        .count();
    assert!(
        named == lines.len() || named >= 4,
        "the buffers name the kernel and the caller: {stderr}"
    );
    assert!(stderr.contains("Adam"), "the update's buffers: {stderr}");
}
