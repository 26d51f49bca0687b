package Test::Sluice::Backend;

# A small HTTP/1.1 backend for proxy tests, in one process multiplexed with
# select(): keep-alive, Content-Length bodies, and behaviours chosen by path:
#   /status/NNN      answer with that status
#   /close           close the connection without answering
#   /slow/SECS/...   answer after SECS seconds (other connections go on)
#   /conns           the number of connections accepted so far
#   /echo...         the request head and body as the response body
#   .../accel[/X]    X-Accel-Redirect: /X (or /internal; /@X gives @X)
#   .../redir...     302 with Location: http://127.0.0.1:PORT/two/target and
#                    Refresh: 0; url=http://127.0.0.1:PORT/two/refresh
#   (Upgrade header) 101 Switching Protocols, then every byte sent back in
#                    upper case
#   anything else    200 "PORT URI"
# Every response carries X-Port: PORT. Options: drop_every => N closes every
# Nth new connection at once; header_case => 1 sends "X-MiXeD-Case: yes";
# status => NNN answers every request with that status; close_all => 1 closes
# every connection once a request has arrived, without answering; delay =>
# SECS delays every answer; close => 1 answers with Connection: close and
# closes; close_after => 1 closes after answering without saying so;
# addr => IP listens there (not 127.0.0.1) and answers with X-Addr: IP.

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw/time/;

sub run {
	my ($port, %opts) = @_;
	my $addr = $opts{addr} // '127.0.0.1';
	my $l = IO::Socket::INET->new(LocalAddr => "$addr:$port", Listen => 128,
		ReuseAddr => 1, Proto => 'tcp') or die "backend $port: $!\n";
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "backend: $!\n";
		close $fh;
	}
	my $sel = IO::Select->new($l);
	my (%buf, @later, %tunnel);
	my $accepted = 0;
	local $SIG{TERM} = sub { exit 0 };
	while (1) {
		my $wait = @later ? 0.01 : 1;
		for my $s ($sel->can_read($wait)) {
			if ($s == $l) {
				my $c = $l->accept() or next;
				$accepted++;
				if ($opts{drop_every} && $accepted % $opts{drop_every} == 0) {
					close $c;
					next;
				}
				$sel->add($c);
				$buf{$c} = '';
				next;
			}
			my $n = sysread($s, my $chunk, 65536);
			unless ($n) {
				$sel->remove($s);
				delete $tunnel{$s};
				delete $buf{$s};
				close $s;
				next;
			}
			if ($tunnel{$s}) {
				syswrite($s, uc $chunk);
				next;
			}
			$buf{$s} .= $chunk;
			while ($buf{$s} =~ /\r?\n\r?\n/) {
				my $end = $+[0];
				my $head = substr($buf{$s}, 0, $end);
				my ($len) = $head =~ /^content-length:\s*(\d+)/mi;
				$len //= 0;
				my $body;
				if ($head =~ /^transfer-encoding:.*chunked/mi) {
					# A chunked body, decoded (its trailers dropped): a
					# server that took its chunks for requests would answer
					# more than it was asked.
					($body, $len) = dechunk(substr($buf{$s}, $end));
					last unless defined $body;
				} else {
					last if length($buf{$s}) < $end + $len;
					$body = substr($buf{$s}, $end, $len);
				}
				substr($buf{$s}, 0, $end + $len) = '';
				my ($method, $uri) = $head =~ /^(\S+)\s+(\S+)/;
				# No request line (a body it could not frame, say a chunked
				# one): 400, and the connection closes, as a server would.
				unless (defined $uri) {
					syswrite($s, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
					$sel->remove($s);
					delete $buf{$s};
					close $s;
					last;
				}
				if ($head =~ /^Upgrade:\s*(\S+)/mi) {
					syswrite($s, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: $1\r\nConnection: Upgrade\r\n\r\n");
					$tunnel{$s} = 1;
					syswrite($s, uc $buf{$s}) if length $buf{$s};
					$buf{$s} = '';
					last;
				}
				if ($uri =~ m!^/close! || $opts{close_all}) {
					$sel->remove($s);
					delete $buf{$s};
					close $s;
					last;
				}
				my $resp = respond($port, $method, $uri, $head, $body, $accepted, %opts);
				my $delay = $uri =~ m!^/slow/([\d.]+)! ? $1 : $opts{delay};
				if ($delay) {
					push @later, [time() + $delay, $s, $resp];
				} else {
					syswrite($s, $resp);
				}
				if (($opts{close} || $opts{close_after}) && !$delay) {
					$sel->remove($s);
					delete $buf{$s};
					close $s;
					last;
				}
			}
		}
		my $now = time();
		my @due = grep { $_->[0] <= $now } @later;
		@later = grep { $_->[0] > $now } @later;
		for my $d (@due) {
			syswrite($d->[1], $d->[2]) if exists $buf{$d->[1]};
		}
	}
}

# A chunked body at the start of $b: its bytes and the length it takes on
# the wire, or nothing while it is incomplete (a malformed one is taken
# whole, as it is).
sub dechunk {
	my ($b) = @_;
	my ($body, $at) = ('', 0);
	while (1) {
		my $eol = index($b, "\r\n", $at);
		return if $eol < 0;
		my ($size) = substr($b, $at, $eol - $at) =~ /^([0-9a-fA-F]+)/;
		return (substr($b, $at), length $b) unless defined $size;
		my $n = hex $size;
		$at = $eol + 2;
		if ($n == 0) {
			my $end = index($b, "\r\n\r\n", $at - 2);
			return if $end < 0;
			return ($body, $end + 4);
		}
		return if length($b) < $at + $n + 2;
		$body .= substr($b, $at, $n);
		$at += $n + 2;
	}
}

sub respond {
	my ($port, $method, $uri, $head, $body, $accepted, %opts) = @_;
	my $status = $opts{status} // 200;
	my $text = "$port $uri";
	if ($uri =~ m!^/status/(\d{3})!) {
		$status = $1;
	} elsif ($uri =~ m!^/conns!) {
		$text = $accepted;
	} elsif ($uri =~ m!^/echo!) {
		$text = $head . $body;
	}
	my $extra = $opts{header_case} ? "X-MiXeD-Case: yes\r\n" : '';
	$extra .= "X-Addr: $opts{addr}\r\n" if $opts{addr};
	if ($uri =~ m!/accel(/\S*)?!) {
		(my $target = $1 || '/internal') =~ s!^/@!@!;
		$extra .= "X-Accel-Redirect: $target\r\n";
	}
	if ($uri =~ m!/redir!) {
		$status = 302;
		$extra .= "Location: http://127.0.0.1:$port/two/target\r\n"
			. "Refresh: 0; url=http://127.0.0.1:$port/two/refresh\r\n";
	}
	$extra .= "Connection: close\r\n" if $opts{close};
	my $content = $method eq 'HEAD' ? '' : $text;
	return "HTTP/1.1 $status Test\r\nX-Port: $port\r\n${extra}Content-Length: "
		. length($text) . "\r\n\r\n" . $content;
}

1;
