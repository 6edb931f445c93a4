//! SVG line charts for the grid's results.
//!
//! SVG line charts for the grid's results, drawn with plotters: categorical x axis, linear
//! or logarithmic y axis, one line per system, missing points left out.

use plotters::coord::ranged1d::{AsRangedCoord, SegmentValue, ValueFormatter};
use plotters::prelude::*;

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

const SIZE: (u32, u32) = (720, 420);
const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];

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
    /// The values that can be drawn (finite, and positive on a log axis).
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .filter(|v| v.is_finite() && (!self.log_y || *v > 0.0))
    }

    /// The chart as an SVG document (an empty one, with the error on stderr, if drawing
    /// failed).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let max = self.values().fold(f64::MIN, f64::max);
        let min = self.values().fold(f64::MAX, f64::min);
        let drawn = if max < min {
            self.draw(&mut out, 0.0..1.0)
        } else if self.log_y {
            let lo = 10f64.powf(min.log10().floor());
            let hi = 10f64.powf(max.log10().ceil()).max(lo * 10.0);
            self.draw(&mut out, (lo..hi).log_scale())
        } else {
            self.draw(&mut out, 0.0..(max * 1.1).max(1e-9))
        };
        if let Err(e) = drawn {
            eprintln!("chart {:?} not drawn: {e}", self.title);
        }
        out
    }

    fn draw<Y>(&self, out: &mut String, y: Y) -> Result<(), String>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let n = self.x_ticks.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            // A segmented `0..k` range has k + 1 segments: one per category.
            .build_cartesian_2d((0..n - 1).into_segmented(), y)
            .map_err(|e| err(&e))?;
        let tick = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                self.x_ticks.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        };
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&tick)
            .y_label_formatter(&|v| short(*v))
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .light_line_style(WHITE)
            .draw()
            .map_err(|e| err(&e))?;
        for (k, (name, vals)) in self.series.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let points: Vec<(SegmentValue<usize>, f64)> = vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    v.filter(|v| v.is_finite() && (!self.log_y || *v > 0.0))
                        .map(|v| (SegmentValue::CenterOf(i), v))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}
