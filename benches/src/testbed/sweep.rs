//! The loss sweep: one-way at 0 to 20 % loss each way.
//!
//! The loss sweep: one-way at 0, 1, 2, 5, 10 and 20 % loss each way on the command line's
//! link, every system asked in turn at each loss, and each system's goodput against
//! (1 - p) x the link.

use super::Args;
use crate::testbed::cell::{self, Outcome, Pattern};
use crate::testbed::emulator::Impairment;
use crate::testbed::flows::link_msgs;
use crate::testbed::netns::{Result, Testbed};

/// The losses of the sweep, each way.
pub const LOSSES: [f64; 6] = [0.0, 0.01, 0.02, 0.05, 0.10, 0.20];

/// `p` in percent, for keys and tables (`5`, `0.5`).
fn pct(p: f64) -> String {
    format!("{}", (p * 1000.0).round() / 10.0)
}

/// Runs the sweep on one testbed and prints each cell, then the summary and its
/// `key=value` line.
pub fn run_loss(a: &Args) -> Result<()> {
    let base = super::impairment(a, a.rate_mbit, a.rtt_ms, 0.0);
    let exon = super::exon_tuning(a, &base);
    let timing = super::timing(a);
    let tb = Testbed::new(base)?;
    let mut port = 5000;
    let mut rows: Vec<(Impairment, Vec<Outcome>)> = Vec::new();
    for p in LOSSES {
        let imp = Impairment { loss: p, ..base };
        let what = format!("one-way, loss sweep at {} %", pct(p));
        super::header(&what, &imp, timing, exon, tb.realtime());
        let out = cell::run_cell(
            &tb,
            imp,
            Pattern::OneWay,
            timing,
            exon,
            &a.systems,
            &mut port,
        )?;
        cell::print_cell(&imp, Pattern::OneWay, exon, timing.size, &out);
        rows.push((imp, out));
    }
    drop(tb);

    let link = link_msgs(&base, timing.size);
    println!();
    println!(
        "loss sweep: {} Mbit/s, RTT {} ms, queue {} B; link {link:.0} msgs/s of {} B; \
         \"of (1-p) link\" is goodput / ((1 - p) x link)",
        base.rate_bps as f64 / 1e6,
        base.rtt.as_secs_f64() * 1e3,
        base.queue_bytes,
        timing.size
    );
    let mut head = format!("{:>6}", "loss %");
    for s in &a.systems {
        head += &format!(" {:>10} {:>14}", s.name(), "of (1-p) link");
    }
    println!("{head}");
    let mut kv = Vec::new();
    for (imp, out) in &rows {
        let mut line = format!("{:>6}", pct(imp.loss));
        for o in out {
            let ideal = (1.0 - imp.loss) * link;
            let rate = o.rate.map_or("-".into(), |r| format!("{r:.0}"));
            let of = o.rate.map_or("-".into(), |r| format!("{:.2}", r / ideal));
            line += &format!(" {rate:>10} {of:>14}");
            let name = o.system.name();
            let p = pct(imp.loss);
            kv.push(format!("{name}_loss{p}={rate}"));
            kv.push(format!("{name}_of_link_loss{p}={of}"));
            if !o.complete {
                kv.push(format!("{name}_complete_loss{p}=false"));
            }
        }
        println!("{line}");
    }
    kv.push(format!("rate_mbit={}", base.rate_bps as f64 / 1e6));
    kv.push(format!("rtt_ms={}", base.rtt.as_secs_f64() * 1e3));
    kv.push(format!("queue_bytes={}", base.queue_bytes));
    kv.push(format!("size={}", timing.size));
    println!("{}", kv.join(" "));
    Ok(())
}
