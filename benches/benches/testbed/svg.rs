//! Hand-written SVG line charts for the grid's results: categorical x axis, linear or
//! logarithmic y axis, one line per system, missing points left out.

use std::fmt::Write as _;

/// One chart.
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The x categories, evenly spaced.
    pub x_ticks: Vec<String>,
    /// Named series, one value (or none) per x category.
    pub series: Vec<(String, Vec<Option<f64>>)>,
    /// Logarithmic y axis.
    pub log_y: bool,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A short form of `v` for axis labels (1.2k, 35, 0.5).
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else {
        format!("{v}")
    }
}

impl Chart {
    /// The y ticks and the axis range they span.
    fn y_axis(&self) -> (Vec<f64>, f64, f64) {
        let vals: Vec<f64> = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .filter(|v| v.is_finite() && (!self.log_y || *v > 0.0))
            .collect();
        let max = vals.iter().copied().fold(f64::MIN, f64::max);
        let min = vals.iter().copied().fold(f64::MAX, f64::min);
        if vals.is_empty() {
            return (vec![0.0, 1.0], 0.0, 1.0);
        }
        if self.log_y {
            let (lo, hi) = (min.log10().floor() as i32, max.log10().ceil() as i32);
            let hi = hi.max(lo + 1);
            let ticks = (lo..=hi).map(|e| 10f64.powi(e)).collect();
            (ticks, 10f64.powi(lo), 10f64.powi(hi))
        } else {
            // Steps of 1, 2 or 5 times a power of ten, about five of them.
            let raw = (max / 5.0).max(1e-9);
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .into_iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(10.0 * mag);
            let top = (max / step).ceil().max(1.0) * step;
            let n = (top / step).round() as usize;
            ((0..=n).map(|i| i as f64 * step).collect(), 0.0, top)
        }
    }

    /// The chart as an SVG document.
    pub fn render(&self) -> String {
        let (ticks, lo, hi) = self.y_axis();
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let y = |v: f64| {
            let f = if self.log_y {
                (v.log10() - lo.log10()) / (hi.log10() - lo.log10())
            } else {
                (v - lo) / (hi - lo)
            };
            TOP + ph * (1.0 - f.clamp(0.0, 1.0))
        };
        let n = self.x_ticks.len().max(1);
        let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / n as f64;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
            LEFT + pw / 2.0,
            esc(&self.title)
        );
        for t in &ticks {
            let ty = y(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                ty + 4.0,
                short(*t)
            );
        }
        for (i, label) in self.x_ticks.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x(i),
                TOP + ph + 18.0,
                esc(label)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 15.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        for (k, (name, vals)) in self.series.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            let pts: Vec<(f64, f64)> = vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.filter(|v| !self.log_y || *v > 0.0).map(|v| (x(i), y(v))))
                .collect();
            let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for (a, b) in &pts {
                let _ = writeln!(s, r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{c}"/>"#);
            }
            let ly = TOP + 10.0 + 20.0 * k as f64;
            let lx = LEFT + pw + 15.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
