//! The terminal view of `okstra watch` (ratatui): a header, the jobs table
//! (scrolled, one row selected), the stage and run totals and the keys; or
//! the selected job's log, followed. Drawing reads nothing but the ends of
//! the logs of the rows on screen.

use super::model::{Job, Model};
use super::source::{self, RunFiles};
use super::view;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;

/// What the user is looking at.
#[derive(Debug, Default, Clone)]
pub struct Screen {
    /// The selected row (an index into the listed jobs).
    pub selected: usize,
    /// The first row on screen.
    pub offset: usize,
    /// The job whose log is followed, by key.
    pub follow: Option<String>,
    /// Rows of jobs the last frame had room for.
    page: usize,
    /// Colour the status column.
    pub color: bool,
}

/// What a key asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    /// Follow the selected job's log (`Enter`, `l`).
    Follow,
    /// Back to the table (`Esc`).
    Back,
    /// `q`, Ctrl-C.
    Quit,
}

impl Screen {
    /// Act on `key` over `jobs` listed jobs; `false` where it quits.
    pub fn key(&mut self, key: Key, model: &Model) -> bool {
        let last = model.len().saturating_sub(1);
        let page = self.page.max(1);
        match key {
            Key::Quit => return false,
            Key::Up => self.selected = self.selected.saturating_sub(1),
            Key::Down => self.selected = (self.selected + 1).min(last),
            Key::PageUp => self.selected = self.selected.saturating_sub(page),
            Key::PageDown => self.selected = (self.selected + page).min(last),
            Key::Home => self.selected = 0,
            Key::End => self.selected = last,
            Key::Follow => {
                self.follow = model.listed().nth(self.selected).map(|j| j.key.clone());
            }
            Key::Back => self.follow = None,
        }
        true
    }

    /// Keep the selection on screen, `page` rows tall.
    fn scroll(&mut self, jobs: usize, page: usize) {
        self.page = page;
        self.selected = self.selected.min(jobs.saturating_sub(1));
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if page > 0 && self.selected >= self.offset + page {
            self.offset = self.selected + 1 - page;
        }
        self.offset = self.offset.min(jobs.saturating_sub(page.max(1)));
    }
}

/// Everything a frame shows, besides the screen's own state.
pub struct Frameset<'a> {
    pub task: &'a str,
    pub model: &'a mut Model,
    pub files: &'a RunFiles,
    /// Unix seconds.
    pub now: i64,
    pub exec_running: bool,
}

/// Draw one frame.
pub fn draw(frame: &mut Frame, screen: &mut Screen, f: Frameset) {
    let totals = f.model.totals();
    f.model.sort();
    let model = &*f.model;
    let shown_stages = totals.stages.len().min(3);
    let [head, body, sums, keys] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(3),
        Constraint::Length(shown_stages as u16 + 2),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let header = view::header(f.task, model, f.now, f.exec_running);
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(Span::styled(
                format!("okstra watch  {header}"),
                Style::new().add_modifier(Modifier::BOLD),
            )),
            Line::from(totals.counts_text(f.exec_running)),
        ]),
        head,
    );
    let follow = screen.follow.as_deref().and_then(|k| model.job(k));
    match follow {
        Some(job) => draw_log(frame, job, f.files, body.union(sums)),
        None => {
            draw_jobs(frame, screen, &f, model, body);
            draw_totals(frame, &totals, shown_stages, sums);
        }
    }
    let help = match follow {
        Some(_) => "Esc back  q quit",
        None => "↑↓ PgUp PgDn scroll  Enter/l follow log  q quit",
    };
    frame.render_widget(
        Paragraph::new(help).style(Style::new().add_modifier(Modifier::DIM)),
        keys,
    );
}

fn draw_jobs(frame: &mut Frame, screen: &mut Screen, f: &Frameset, model: &Model, area: Rect) {
    let page = usize::from(area.height.saturating_sub(1));
    screen.scroll(model.len(), page);
    let rows: Vec<(usize, Vec<String>)> = model
        .listed()
        .enumerate()
        .skip(screen.offset)
        .take(page)
        .map(|(i, job)| {
            let log = job
                .prompt
                .as_deref()
                .map(|p| source::last_line(&f.files.log_of(p)))
                .unwrap_or_default();
            let now = view::clock(model, f.now, f.exec_running);
            (i, view::cells(model, job, now, f.exec_running, log))
        })
        .collect();
    let widest = |col: usize, cap: usize| {
        let w = rows.iter().map(|(_, c)| c[col].chars().count()).max();
        w.unwrap_or(0).clamp(view::HEADS[col].len(), cap) as u16
    };
    let widths = [
        Constraint::Length(widest(0, 8)),
        Constraint::Length(widest(1, 12)),
        Constraint::Length(9),
        Constraint::Length(3),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(widest(6, 9)),
        Constraint::Fill(1),
    ];
    let table_rows = rows.into_iter().map(|(i, cells)| {
        let status = status_style(&cells[2], screen.color);
        let mut row = Row::new(cells.into_iter().enumerate().map(|(c, text)| match c {
            2 => Span::styled(text, status),
            _ => Span::raw(text),
        }));
        if i == screen.selected {
            row = row.style(Style::new().add_modifier(Modifier::REVERSED));
        }
        row
    });
    let heads = Row::new(view::HEADS).style(Style::new().add_modifier(Modifier::BOLD));
    frame.render_widget(Table::new(table_rows, widths).header(heads), area);
}

fn status_style(status: &str, color: bool) -> Style {
    if !color {
        return Style::new();
    }
    match status {
        "completed" => Style::new().fg(Color::Green),
        "running" | "exited" | "retrying" | "in-progress" => Style::new().fg(Color::Yellow),
        "error" | "timeout" => Style::new().fg(Color::Red),
        _ => Style::new(),
    }
}

fn draw_totals(frame: &mut Frame, totals: &super::model::Totals, shown: usize, area: Rect) {
    let mut rows = view::totals_rows(totals);
    // The last stages (the one running is among them), and the run's line.
    let cut = rows.len() - 1 - shown;
    rows.drain(..cut);
    let run = rows.len() - 1;
    let lines = rows.into_iter().enumerate().map(|(i, r)| {
        let row = Row::new(r);
        match i == run {
            true => row.style(Style::new().add_modifier(Modifier::BOLD)),
            false => row,
        }
    });
    let widths = [
        Constraint::Length(12),
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Fill(1),
    ];
    let heads = Row::new(view::TOTAL_HEADS).style(Style::new().add_modifier(Modifier::BOLD));
    frame.render_widget(Table::new(lines, widths).header(heads), area);
}

fn draw_log(frame: &mut Frame, job: &Job, files: &RunFiles, area: Rect) {
    let path = job.prompt.as_deref().map(|p| files.log_of(p));
    let title = match &path {
        Some(p) => format!(
            " log of {} ({}) ",
            job.label,
            crate::paths::display_for(&files.root, p)
        ),
        None => format!(" log of {} (not dispatched yet) ", job.label),
    };
    let inner = usize::from(area.height.saturating_sub(2));
    let lines: Vec<Line> = path
        .map(|p| source::log_tail(&p, inner))
        .unwrap_or_default()
        .into_iter()
        .map(Line::from)
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(title)),
        area,
    );
}
